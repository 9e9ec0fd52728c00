@echo off
rem Called by install.bat and scripts\*.bat: sets H3KIT_PY (and H3KIT_PY_ARGS) to a Python 3.10 or newer.
rem Search order: %%H3KIT_PYTHON%%, py -3, python on PATH, then a ComfyUI portable python_embeded
rem beside or above the h3kit folder. Never pip.exe: bootstrap always runs "python -m pip".
set "H3KIT_PY="
set "H3KIT_PY_ARGS="
set "H3KIT_ROOT=%~dp0.."
set "CHECK=import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)"
if defined H3KIT_PYTHON ( "%H3KIT_PYTHON%" -c "%CHECK%" >nul 2>&1 && ( set "H3KIT_PY=%H3KIT_PYTHON%" & exit /b 0 ) )
py -3 -c "%CHECK%" >nul 2>&1 && ( set "H3KIT_PY=py" & set "H3KIT_PY_ARGS=-3" & exit /b 0 )
python -c "%CHECK%" >nul 2>&1 && ( set "H3KIT_PY=python" & exit /b 0 )
for %%P in ("%H3KIT_ROOT%\python_embeded\python.exe" "%H3KIT_ROOT%\..\python_embeded\python.exe" "%H3KIT_ROOT%\..\..\python_embeded\python.exe") do (
  if exist "%%~P" "%%~P" -c "%CHECK%" >nul 2>&1 && ( set "H3KIT_PY=%%~fP" & exit /b 0 )
)
echo error: h3kit needs Python 3.10 or newer, and none was found (tried py -3, python, ComfyUI portable python_embeded).
echo fix: install Python from https://www.python.org/downloads/ (tick "Add python.exe to PATH"), or put this folder inside ComfyUI_windows_portable, then run this again.
exit /b 3
