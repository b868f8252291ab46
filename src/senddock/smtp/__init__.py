"""The SMTP transport, below delivery/, campaigns/ and audience/: one session, its replies."""

from senddock.smtp.reply import Reply
from senddock.smtp.session import SmtpSession

__all__ = ["Reply", "SmtpSession"]
