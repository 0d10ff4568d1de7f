print("offlinepkg")
