"""This package holds outlast's integrations with the agent frameworks people use, one package per
framework, each behind its own extra (``outlast[langgraph]``)."""
