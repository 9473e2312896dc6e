"""Fast paths for recurrences; each is tested against its reference twin in float64."""
