"""A distributed job: one rank's view as a summary (:mod:`.rank_summary`), and what only the
view of every rank shows (:mod:`.cross_rank`)."""
