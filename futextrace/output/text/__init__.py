"""The words: every text futextrace prints, over the data that record/ and analysis/ return."""
