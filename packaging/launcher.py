"""The bundle's program: PyInstaller freezes this script, which is `python -m assistant`."""

from assistant.cli import main

raise SystemExit(main())
