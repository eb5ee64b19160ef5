"""Memory drawn: snapshots and per-cell history as text and static HTML, ``%%gpumem``'s
profile by line, and the plots (matplotlib, optional)."""
