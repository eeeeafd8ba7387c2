"""The one exception type the CLI turns into a one-line message and a non-zero exit, never a traceback."""


class AssistantError(Exception):
    """An error the user can act on: the message names the file, tensor or option and the problem."""
