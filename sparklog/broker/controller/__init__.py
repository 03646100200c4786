"""The controller: leader elections, ISR upkeep and admin requests; its pure policies
(placement, election) are :mod:`sparklog.runtime.placement` and :mod:`sparklog.runtime.policy`."""
