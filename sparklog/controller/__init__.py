"""Controller-side policies and, later, the controller itself (leader election, ISR)."""
