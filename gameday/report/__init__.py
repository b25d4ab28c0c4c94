"""Reports: the terminal verdict table (and, later, HTML and Markdown)."""
