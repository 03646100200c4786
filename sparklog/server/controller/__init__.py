"""The controller: leader elections, ISR upkeep and admin requests, with its pure policies (placement, election)."""
