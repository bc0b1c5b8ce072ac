"""The left column: hypothesis board and step list."""
