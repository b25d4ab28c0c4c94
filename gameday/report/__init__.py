"""Reports: the terminal verdict table, one journal as HTML or Markdown, its timeline."""
