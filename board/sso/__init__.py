"""Single sign-on with OpenID Connect (authorization code with PKCE)."""
