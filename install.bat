@echo off
rem h3kit one-click installer for Windows: double-click it. It finds a Python 3.10+
rem (py -3, python, or the ComfyUI portable python_embeded) and hands over to
rem scripts\bootstrap.py, which makes a private environment, installs h3kit into it
rem and runs "h3kit install". Arguments are passed on (try: install.bat --help).
setlocal
chcp 65001 >nul
set "PYTHONUTF8=1"
call "%~dp0scripts\find_python.bat"
if errorlevel 1 ( set "RC=3" & goto :end )
"%H3KIT_PY%" %H3KIT_PY_ARGS% "%~dp0scripts\bootstrap.py" %*
set "RC=%ERRORLEVEL%"
if not "%RC%"=="0" echo Installation did not finish (exit code %RC%). The log folder is named above.
:end
echo.
pause
exit /b %RC%
