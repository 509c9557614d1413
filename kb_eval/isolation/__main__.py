"""`python -m kb_eval.isolation [module[:cuda]][+serve]`: how every child starts."""

from kb_eval.isolation.child import child_main

if __name__ == "__main__":
    child_main()
