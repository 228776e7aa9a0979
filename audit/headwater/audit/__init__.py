"""The audit service: counts every tier, reconciles with the producers' count events, serves the dashboard."""
