"""HTTP routes: parse, call one service method, shape the response. No logic here."""
