"""Directory: the Linux users the hosts report, linked to members and teams."""
