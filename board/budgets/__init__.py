"""Budgets: each team's GPU-hours and money per month or quarter, used and forecast."""
