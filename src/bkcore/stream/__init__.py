"""Log streams over ledgers (issue 5): records, positions, segments."""
