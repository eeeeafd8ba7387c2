"""A conversation without its interface: the SQLite store, the chat's settings, the prompt built from the
history and its attachments, the recorder that saves an answer as it streams, Markdown export and writing an
answer's code blocks to files.

Nothing here imports Textual, so the store and settings are usable from any command and from tests."""
