"""What the tests share: support modules that tests import (test modules import
from here, never from each other)."""
