"""Rows of the engine profile beyond the EAGLE-3 table of :mod:`hsdiff.rules.profile`: the draft kinds
(:mod:`.kinds`), the DFlash-family rows (:mod:`.dflash`) and version parsing (:mod:`.versions`).

Like the table itself, these modules may name engines; every other module asks them.
"""
