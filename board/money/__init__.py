"""Money: price edits (the correction window, the audit), the FOCUS export and team
statements, on the money core in board/pricing (tables, currencies, cost)."""
