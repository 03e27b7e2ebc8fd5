"""Pricing, the money core below reports and money: the tables `prices` and
`workspace_currencies` (and the migration's view `price_ranges` over them), the currencies
the board knows, and the cost arithmetic every report that shows a cost uses. Reports
price their rows with it; money (price edits, statements, the FOCUS export) sits on it."""
