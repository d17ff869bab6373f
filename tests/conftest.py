"""Shared pytest plugins; each lives in its own module so suites stay independent."""

pytest_plugins = ["conftest_spark"]
