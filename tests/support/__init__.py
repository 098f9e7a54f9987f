"""What the tests share: process records, lifecycle checks, fixtures of configurations and data."""
