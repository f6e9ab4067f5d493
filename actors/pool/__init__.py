"""The pool actor and its collaborators: one actor per configured pool."""
