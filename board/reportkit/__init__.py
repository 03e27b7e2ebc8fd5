"""What reports, money, reservations and notices share that is no domain's logic: report
windows and their zones (params), formula-safe CSV cells (csv), streamed answers that own
their connection (streaming), the per-workspace report slots (slots), deflate segments
(deflated) and how figures are rounded (figures). A kit package: it imports no domain
and names no table in SQL."""
