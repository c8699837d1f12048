"""The report layer: report.md, its convergence section, and every figure."""
