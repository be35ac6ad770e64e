"""Rows of the engine profile beyond the EAGLE-3 table of :mod:`hsdiff.rules.profile`: the draft kinds
(:mod:`.kinds`), the DFlash-family rows (:mod:`.dflash`), version parsing (:mod:`.versions`), the lines engines
log (:mod:`.traces`) and the speculative-decoding metrics they export (:mod:`.metrics`).

Like the table itself, these modules may name engines; every other module asks them.
"""
