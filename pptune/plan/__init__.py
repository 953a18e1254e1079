"""Plans: recommend, what-ifs (simulate), emit (framework writers)."""
