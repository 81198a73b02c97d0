"""Launch plans, kernel loading and caches."""
