"""Token pieces to text as they stream: a token may end in the middle of a UTF-8 character."""

from __future__ import annotations

import codecs


class TextStream:
    """Turns a stream of token ids into text pieces, holding back bytes of an unfinished character; with
    ``special`` a control token shows as its text (a tool call's "[TOOL_CALLS]"), else as nothing."""

    def __init__(self, model, special: bool = False):
        self._model = model
        self._special = special
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token: int) -> str:
        """The text that this token completes (may be "" while a character is still unfinished)."""
        return self._decoder.decode(self._model.piece(token, special=self._special))

    def flush(self) -> str:
        """Whatever is held back at the end of the stream, with invalid bytes replaced."""
        return self._decoder.decode(b"", final=True)
