"""Money: prices per GPU model, cost in reports, the FOCUS export and team statements."""
