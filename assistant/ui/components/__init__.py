"""The chat screen's parts that own state and act on it (attachments, conversations, settings, saving code),
each a widget that is never shown: the screen composes them and hands each the widgets it shows itself on."""
