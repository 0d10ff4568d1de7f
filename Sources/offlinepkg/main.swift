import OfflinePkgCLI

#if canImport(Glibc)
import Glibc
#endif

exit(OfflinePkgCommand.mainWaiting(Array(CommandLine.arguments.dropFirst())))
