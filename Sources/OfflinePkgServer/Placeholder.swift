import OfflinePkg
