"""What every reader of user input shares: the strict pydantic base (:mod:`.schema`),
did-you-mean hints (:mod:`.hints`), the one kind every user mistake is
(:mod:`.user_errors`), reading any text file into one-line errors (:mod:`.textfile`),
and the readers of the tables, traces and override files a scenario names
(:mod:`.tables`, :mod:`.traces`, :mod:`.overrides`).
"""
