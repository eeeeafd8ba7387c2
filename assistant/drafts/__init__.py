"""Drafts compressed from a target's own weights (issue 54): candidates made by dropping blocks or casting to
fewer bits, each measured for agreement with the target on text the target writes itself and for its cost per
token on this machine, and ranked by the speed of the chain they would make."""
