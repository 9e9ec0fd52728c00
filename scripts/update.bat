@echo off
rem One click for 'h3kit update' in h3kit's private environment (no PATH needed).
setlocal
chcp 65001 >nul
set "PYTHONUTF8=1"
call "%~dp0find_python.bat"
if errorlevel 1 ( set "RC=3" & goto :end )
"%H3KIT_PY%" %H3KIT_PY_ARGS% "%~dp0bootstrap.py" --run update %*
set "RC=%ERRORLEVEL%"
:end
echo.
pause
exit /b %RC%
