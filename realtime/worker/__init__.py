"""Background work that feeds server events to the engine: outbox runner, timers, reconciler."""
