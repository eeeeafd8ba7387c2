"""Fenced code blocks of an answer, so the palette can offer to copy each one."""

from __future__ import annotations

from dataclasses import dataclass

from markdown_it import MarkdownIt


@dataclass(frozen=True)
class CodeBlock:
    language: str
    code: str

    @property
    def label(self) -> str:
        lines = self.code.count("\n") + (0 if self.code.endswith("\n") else 1)
        first = next((line.strip() for line in self.code.splitlines() if line.strip()), "")
        return f"{self.language or 'text'}, {lines} line{'s' if lines != 1 else ''}: {first[:40]}"


def code_blocks(markdown: str) -> list[CodeBlock]:
    """The same blocks the Markdown widget renders (an unclosed fence runs to the end, as it shows)."""
    tokens = MarkdownIt("commonmark").parse(markdown)
    return [CodeBlock(t.info.strip().split(" ")[0], t.content) for t in tokens if t.type in ("fence", "code_block")]
