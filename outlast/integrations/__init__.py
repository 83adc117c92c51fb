"""Integrations of outlast with the agent frameworks people use, one package per framework, each
behind its own extra (``outlast[langgraph]``)."""
