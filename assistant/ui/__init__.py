"""The Textual chat: ``ChatApp`` in app.py, screens in screens/, widgets in widgets/, styles in .tcss files."""
