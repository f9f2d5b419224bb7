from django.contrib import admin

from agent.models import TerminalAllowedPrefix
from neotask_site.ownership import OwnedAdmin


@admin.register(TerminalAllowedPrefix)
class TerminalAllowedPrefixAdmin(OwnedAdmin):
    list_display = ["prefix", "owner", "created_at"]
    list_filter = ["owner"]
    search_fields = ["prefix"]
    readonly_fields = ["created_at"]
