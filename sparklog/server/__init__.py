"""The server side: the replica manager every server component receives, the broker
agent, the replica fetcher, the controller with its pure policies, and the produce path."""
