"""Conversations: the SQLite store, chat settings, Markdown export and the streamed-answer recorder.

Nothing here imports Textual, so the store and settings are usable from any command."""
