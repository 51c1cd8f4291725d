"""SQL over stream tables: what ``session.sql`` accepts (policy) and the functions it may call."""
