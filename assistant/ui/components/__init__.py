"""The chat screen's parts that are never shown: those that own its state and act on it (conversations,
attachments, settings, saving code) and the workers that load models, answer and run commands off the
window's thread. The screen composes them, handing each the widgets it shows itself on."""
