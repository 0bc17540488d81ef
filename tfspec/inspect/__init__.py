"""What a spec costs and does: analysis, summary tables, diagrams, diffs, attention patterns, measurement and property verification."""
