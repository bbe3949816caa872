"""The agent-loop techniques that ride on the pack: the failure log (what went wrong so far), goal
recitation (the closing STATUS block) and structural variation of that block's layout.

They sit beside the pipeline, not inside it: the pipeline's recite stage (`pipeline/status.py`) calls them.
"""
