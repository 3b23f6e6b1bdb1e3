"""SQLite persistence. All SQL lives in this package, behind repository classes."""
