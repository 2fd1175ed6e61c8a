"""Grounding: whether a plan's objects are what its instruction asks for, and things its robot
can perceive (:mod:`.objects`), judged with a learned model of word meaning (:mod:`.meaning`)."""
