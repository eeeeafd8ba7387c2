"""Full screens and modal dialogs of the chat app."""
