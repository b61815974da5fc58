"""What publish checks before, while and after it uploads: the plan (pure), conflicts with what
an index holds, one index per variant, the re-audit of the staged bytes and their seal, the
read-back, deadlines, and the lock one run holds. Each refusal names its rule
(:data:`release.publish.guards.plan.RULES`)."""
