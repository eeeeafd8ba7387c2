"""What every component of the chat screen is: a widget for Textual's messages and workers, never drawn."""

from textual.widget import Widget


class Component(Widget):
    def __init__(self):
        super().__init__()
        self.display = False
