"""Load → decide → commit → effects: the one path every session change takes."""
